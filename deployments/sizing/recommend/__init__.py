"""`make recommend` in the tuner's parts: the arithmetic on usage history (`sizing`: requests, limits, replica
bounds; `pattern`: the request rate's daily or weekly pattern; `prescale`: the windows planned ahead of it;
`gpu_sizing`: GPU replicas and batch headroom, from the DCGM series `gpu_history` reads), what it leaves behind
(`outputs`: overlays and report; `plots`: the PNGs beside it), and the command (`command`)."""

from deployments.sizing.recommend.command import add_command

__all__ = ["add_command"]
