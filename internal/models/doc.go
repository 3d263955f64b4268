// Package models holds the sequential specifications that fencekit's
// linearizability checks test histories against, as porcupine models.
//
// The fenced register (Register) is one key of a fence.Store: a value and a
// fence. fence/fencetest checks a store's concurrent history against it, and
// the chaos run of cmd/fencelab checks its histories with it too, so that
// both agree on what a fenced store may do.
//
// A history identifies every value by the id of the write that stored it,
// never by its bytes: two writes of equal bytes are different writes, and a
// read must show which one it saw.
package models
