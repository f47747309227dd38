"""``spanjudge demo``: a scripted support agent, an offline judge and the report (private)."""
