"""One server connection, supervised: the worker's session host.

- ``host``: the dispatcher: the agent's requests in, answers out;
- ``generations``: start, serve, retire, the standby's promotion, and a
  cancelled call's server's grace (a ping);
- ``deadline``: each call's deadline, the verdict "timed out", what
  ``on_timeout`` does and how a timeout is worded (one module for all of it);
- ``calls``: the requests in flight and the generation each call reached;
- ``scope``: what one call owns from reaching its server to its answer (its
  accounting and denials windows, its progress, its cut);
- ``transports``: which session speaks to a server (the one place a spec's
  transport is read);
- ``generation``: one launched (or reached) server's life as a state machine;
- ``contain``: one generation's containment: its tree, the limit watch, the
  kill at its end;
- ``accounting``: what each call's server tree used (CPU, peak memory,
  egress), read at the call's two ends;
- ``standby``: one more generation kept ready beside the current one;
- ``listing``: the tool list as the agent knows it, re-listed on change;
- ``progress``: servers' progress notifications, coalesced for the agent;
- ``cut``: the middle of a text result the agent's output cap would cut, left here.
"""

__all__: list[str] = []
