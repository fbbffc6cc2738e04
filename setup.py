"""The package list, from the folders (pyproject.toml holds everything else).

The project's top-level folders are installed under one namespace: ``db/`` as ``tsopt.db``,
``workers/`` as ``tsopt.workers``, ``search_spaces/`` as ``tsopt.search_spaces`` and
``reports/`` as ``tsopt.reports``. Listing the packages here, from the tree, means a new
space folder needs no packaging edit.
"""

from setuptools import find_packages, setup

MAPPED = {"tsopt.db": "db", "tsopt.workers": "workers", "tsopt.search_spaces": "search_spaces",
          "tsopt.reports": "reports"}

packages = ["tsopt", *(f"tsopt.{name}" for name in find_packages("tsopt"))]
for package, folder in MAPPED.items():
    packages += [package, *(f"{package}.{name}" for name in find_packages(folder))]

setup(packages=packages, package_dir={"tsopt": "tsopt", **MAPPED})
