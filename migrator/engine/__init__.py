"""The phase engine: discovery and planning over a snapshot, the runner loop (gate → write →
record → gate), the state document and its storage, waits with watches. It calls phases and the
kube choke point; it never prints (progress goes through callbacks) and never imports typer/rich.
"""
