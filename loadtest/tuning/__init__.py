"""The serving-spec tuner, in Model Analyzer's three parts: what to try (`space`), how to measure
it (`measure`), how to search (`search`), and what to show (`outputs`); `check` holds the search
against brute force on the same measurements."""
