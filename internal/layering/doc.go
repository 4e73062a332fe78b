// Package layering holds the test that keeps the code's imports pointing
// the way ARCHITECTURE.md draws them: cli -> phase -> the phases' domain
// packages -> {kube, step, remote}, with engine knowing only step, and the
// lab (its own module) out of reach of the tool.
package layering
