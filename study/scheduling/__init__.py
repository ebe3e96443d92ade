"""The study's scheduler, in plain code that never imports Ray: which trials are left
(:mod:`~study.scheduling.trials`), their ledgers (:mod:`~study.scheduling.ledger`), the ``runs`` rows'
transitions (:mod:`~study.scheduling.rows`), the run contract's stop-all decision
(:mod:`~study.scheduling.contract`), Optuna's ask/tell per grid cell (:mod:`~study.scheduling.sampler`)
and the console's progress (:mod:`~study.scheduling.progress`).  :mod:`study.tuning.hooks` turns Ray
Tune's hooks into calls to it (docs/design.md §9)."""
