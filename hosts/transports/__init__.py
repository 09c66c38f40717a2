"""Pluggable async transports: run argv here, over ssh, and inside containers, as a chain.
Plain Python; nothing here imports Django.

``base`` (the protocol, results and errors), ``local``, ``ssh``, ``containers``, ``chain``
(hops joined into one transport), ``script`` (a script sent on stdin, ``diagnose``); callers
import each name from its module, and this package re-exports nothing."""
