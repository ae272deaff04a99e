CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                     amount_cents INTEGER NOT NULL, status TEXT NOT NULL);
INSERT INTO customers VALUES (1, 'Ana', 'PT'), (2, 'Ben', 'UK'), (3, 'Chen', 'CN'), (4, 'Dara', 'IE'),
                             (5, 'Eli', 'UK'), (6, 'Fay', 'PT');
INSERT INTO orders VALUES
  (1, 1, 2500, 'paid'), (2, 1, 1500, 'paid'), (3, 2, 9900, 'refunded'), (4, 2, 1000, 'paid'),
  (5, 3, 4000, 'paid'), (6, 4, 4000, 'paid'), (7, 5, 12000, 'paid'), (8, 5, 300, 'cancelled'),
  (9, 3, 50, 'paid'), (10, 6, 100, 'pending');
