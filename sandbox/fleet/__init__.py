"""The sandbox as a fleet of Ray actors: one host actor per sandbox node, each on its node's own
Docker engine (a unix socket; no Docker API on the network), and one router every client shares.

    from proctor.sandbox.fleet import RaySandbox
    with RaySandbox(address="auto") as sb:
        results = sb.run_many(jobs)

Needs ``pip install 'proctor[ray]'``; importing this package does not import Ray (making a
`RaySandbox` does). See docs/ray.md.
"""

from .client import RaySandbox, require_ray
from .options import FleetInfo, FleetOptions, HostInfo, HostState
from .security import ClusterNotAuthenticated

__all__ = ["ClusterNotAuthenticated", "FleetInfo", "FleetOptions", "HostInfo", "HostState", "RaySandbox",
           "require_ray"]
