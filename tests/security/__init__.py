"""Attack tests for issue #37: the devbox is a trust boundary."""
