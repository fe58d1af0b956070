"""A realistic Aurora DSQL change stream and its expected result, for the demo, tests and bench."""
