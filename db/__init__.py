"""tsopt's database: SQLAlchemy models, queries, Alembic migrations, and the Store.

``tsopt.db.store.Store`` is the only API the rest of tsopt uses. Inside:
``models`` (the tables), ``queries`` (reads: rows in, plain records out),
``views`` (the frozen read results), ``engine`` (URLs, SQLite set-up),
``migrate`` + ``migrations/`` (Alembic, version table ``tsopt_alembic_version``).
"""
