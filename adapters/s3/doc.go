// Package s3 is a fence.Store on an S3-compatible bucket, built on S3's
// conditional writes: PutObject with If-Match on the ETag a write has just
// read, or If-None-Match: * when there was no object. The server applies
// the PUT only if nobody wrote in between, so comparing the token with the
// key's fence and writing are one atomic step at the server.
//
// Each key is one object whose body is a 32-byte header (the fence, and
// whether the key holds a value) followed by the value. The fence is in the
// body because an ETag is computed from the body alone: with the fence only
// in the metadata, raising it would leave the ETag unchanged and let a stale
// writer's If-Match through.
//
// A write reads the fence from the header and the ETag from the same GET
// (a ranged GET of the header), never from a HEAD or from the user
// metadata: a server that reads the metadata and the ETag separately, as
// versitygw v1.8.0 does in a HEAD, can pair an old fence with a new ETag,
// and a PUT conditioned on that ETag would overwrite a higher fence. An ETag
// older than the body only makes the PUT fail, and the write reads again.
//
// Call Store.VerifyServer at startup: some S3-compatible servers accept the
// conditional headers and ignore them, and on those every write would be a
// check-then-write. It fails with an error matching ErrUnsafeServer.
//
// Delete leaves a tombstone object that keeps the fence; no key's object is
// ever deleted, so a bucket lifecycle rule must not expire the store's objects.
// The store has no lock Backend: pair it with a lock on Redis, PostgreSQL
// or memory.
//
// docs/s3.md in the repository describes the layout, the requests each call
// makes, what HTTP 412 and 409 mean, the costs, the limits, and which
// services are safe by their documentation against which were tested.
//
// The package is named s3, like the SDK's; import it under another name:
//
//	import fences3 "github.com/fencekit/fencekit/adapters/s3"
package s3
