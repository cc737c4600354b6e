package retention

// CleanerLockKey is cleanerLockKey, for the tests that take a Cleaner's lock or look for it in pg_locks.
var CleanerLockKey = cleanerLockKey
