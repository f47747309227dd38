"""Review: reading what the loop did, without calling the judge.

:mod:`.explain` (how one trace is read), :mod:`.export` (results back into test cases),
:mod:`.agreement` (how often the judge agrees with a person).
"""
