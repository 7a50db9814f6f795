"""What backfilling's plans share (conservative: conservative.py and replan.py; on nodes)."""

#: Beyond every time a trace reaches.
FOREVER = 2**62
