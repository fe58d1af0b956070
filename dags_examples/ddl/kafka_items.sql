-- The tables of kafka_to_delta (the demo topic's schema): name yours here.
CREATE TABLE shop.items (
    id BIGINT PRIMARY KEY,
    name TEXT,
    qty INT,
    price NUMERIC(10, 2),
    updated_at TIMESTAMPTZ
);
