//go:build !fencekit_broken

package lock

// brokenBuild is false: this build has none of the broken variants of
// brokenVariants. Every check reads brokenBuild && broken.x, which the
// compiler folds to false, so neither the check nor the code it guards is
// compiled in.
const brokenBuild = false

// broken exists only so that the guarded checks type-check: no code of this
// build reads or sets it.
var broken brokenVariants
