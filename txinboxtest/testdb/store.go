package testdb

import "github.com/txinbox/txinbox"

// Store returns the txinbox.Store of the test's schema, on its pool.
func (d *DB) Store() txinbox.Store { return txinbox.Store{DB: d.Pool, Schema: d.Schema} }
