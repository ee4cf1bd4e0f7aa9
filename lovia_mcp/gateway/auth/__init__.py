"""Who a request to the gateway is: one :class:`~.authenticator.Authenticator` per scheme, picked from the command's options.

Layout (the httpcore backends' shape: the interface and every
implementation in one folder):

- ``authenticator``: the contract (request headers in, an ``Identity`` or a
  ``Refusal`` out), the bearer header's parsing and the challenge;
- ``anonymous``: no credentials, loopback only;
- ``tokens``: the token file's ``PRINCIPAL TOKEN`` lines;
- ``oauth``: an OAuth 2.1 resource server (JWT access tokens; the MCP
  SDK's ``TokenVerifier``), with ``jwks`` the issuer's keys;
- ``registry``: the scheme the options of ``lovia-mcp serve`` ask for.

A new scheme is one module and one line in ``registry``; the rest of the
gateway sees only the principal (:mod:`..principals`) and the refusal.
This ``__init__`` imports no module of its own.
"""

__all__: list[str] = []
