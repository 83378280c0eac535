"""Policy rules more than one service applies: pure functions and plain
data, no bus, no clock of their own."""
