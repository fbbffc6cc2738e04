"""Roles floor, DSL side: judge a genome (TS checks + tsopt's own) and count a space's funnel."""
