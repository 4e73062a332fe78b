// Package standalone holds the test that the repository stands alone:
// nothing in it refers to a file outside it, so a fresh clone builds,
// tests and runs its demo with nothing beside it.
package standalone
