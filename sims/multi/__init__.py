"""The "multi:A+B+..." family: several tasks in one batch. The env is sims/multitask.py; this
package declares the family (family.py)."""
