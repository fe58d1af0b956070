-- The tables of the dsql_to_delta example, which its demo stream writes: replace them with yours
-- in your copy of the DAG.
CREATE TABLE public.customers (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    email varchar(200),
    balance numeric(12, 2),
    lifetime numeric,
    score double precision,
    ratio real,
    active boolean,
    avatar bytea,
    birthday date,
    wake_time time,
    wake_tz timetz,
    created_at timestamp,
    updated_at timestamptz,
    session_len interval,
    prefs json,
    external_id uuid,
    age smallint,
    visits integer,
    tags oidvector,
    owner_oid oid,
    bio text
);
CREATE TABLE public.order_items (
    order_id INT,
    item_id INT,
    quantity INT,
    price NUMERIC(10, 2),
    PRIMARY KEY (order_id, item_id)
);
