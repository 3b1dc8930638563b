"""Past one machine: the ledger synced to Git (:mod:`strata.sync.git`) and the audit bundle."""
