//go:build !race

package kserve

const raceEnabled = false
