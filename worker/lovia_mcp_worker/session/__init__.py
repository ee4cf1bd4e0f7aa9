"""One server connection, supervised: the worker's session host.

- ``host``: the agent's requests in, answers out; generations and restarts;
- ``calls``: the calls in flight, each one's deadline, what a cancel means
  and the server's cancel grace (a ping);
- ``transports``: which session speaks to a server (the one place a spec's
  transport is read);
- ``generation``: one launched (or reached) server's life as a state machine;
- ``contain``: one generation's containment: its tree, the limit watch, the
  kill at its end;
- ``standby``: one more generation kept ready beside the current one;
- ``listing``: the tool list as the agent knows it, re-listed on change;
- ``progress``: servers' progress notifications, coalesced for the agent;
- ``cut``: the middle of a text result the agent's output cap would cut, left here.
"""

__all__: list[str] = []
