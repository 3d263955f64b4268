package postgres

// WrapErrForTest exposes wrapErr, the one place where driver errors are
// classified, to the tests.
var WrapErrForTest = wrapErr
