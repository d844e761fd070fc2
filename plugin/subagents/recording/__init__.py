"""Recording conversations: what a turn recorded, and turning a recording into a test."""
