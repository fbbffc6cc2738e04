"""Roles floor, measuring side: load, check and time built candidates on a GPU.

Torch and the standard library only (an import contract in the tests holds it so): this
folder runs on GPU machines that have neither the DSL nor the search stack.
"""
