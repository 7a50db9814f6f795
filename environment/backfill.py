"""What backfilling's plans share (conservative: conservative.py and replan.py; on nodes)."""

FOREVER = 2**62  #: Beyond every time a trace reaches.
