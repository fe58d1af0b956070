"""The pure-Python core: formats, reassembly, ordering, DDL and type decoding.

Nothing here imports Spark, Delta, Airflow or boto3, so the core runs on Spark executors and in
plain unit tests alike.
"""
