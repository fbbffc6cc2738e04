"""tsopt's database: SQLAlchemy models, queries, Alembic migrations, and the Store.

``tsopt.db.store.Store`` is the only API the rest of tsopt uses. It is composed of one role
class per module over ``database`` (the open database: engine, transactions, Optuna's
storage): ``studies`` (studies, candidates, study views), ``claims`` (runs, claims, reaping),
``caches`` (verdicts, whole verdicts, TS searches), ``builds`` (the build cache, artifact
files), ``measurements`` (measurements, baselines). Beneath them: ``models`` (the tables),
``queries`` (reads: rows in, plain records out), ``views`` (the frozen read results),
``engine`` (URLs, SQLite set-up), ``migrate`` + ``migrations/`` (Alembic, version table
``tsopt_alembic_version``).
"""
