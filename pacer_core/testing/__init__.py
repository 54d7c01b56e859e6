"""What the tests and the scripts in benchmarks/ share: tiny random model pairs built in-process
(`tiny`) and exact output distributions computed by enumeration on a tiny vocabulary (`enumeration`).
Nothing in the runtime imports this package."""
