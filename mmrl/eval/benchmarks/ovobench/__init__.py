"""OVO-Bench: the offline protocol and its official scorer, the streaming run, and the hooks ``eval/ovobench*.yaml``
name."""
