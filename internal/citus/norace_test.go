//go:build !race

package citus

const raceEnabled = false
