"""Analytics over the stored runs that no single page's counts give: a few bounded aggregate
queries each, whose rows go to pure functions testable against a hand-built history."""
