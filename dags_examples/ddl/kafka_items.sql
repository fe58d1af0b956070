-- The tables of the kafka_to_delta example, which its demo stream writes: replace them with yours
-- in your copy of the DAG.
CREATE TABLE shop.items (
    id BIGINT PRIMARY KEY,
    name TEXT,
    qty INT,
    price NUMERIC(10, 2),
    updated_at TIMESTAMPTZ
);
