"""Versioned PySpark jobs: each module has ``JOB_NAME``, ``JOB_VERSION`` and ``main()``."""
