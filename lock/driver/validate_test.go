package driver_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// What the lock.Client checks once, before a driver sees a request (the old
// lock.ValidateArgs, ValidateName, ValidatePlace, ValidatePermit,
// ValidateMulti and ValidateMetadata, now one set of checks). Every refusal
// matches fence.ErrInvalid (lock.ErrInvalid).

func TestValidateName(t *testing.T) {
	for name, ok := range map[string]bool{
		"job":                                  true,
		"ключ/🔒":                               true,
		strings.Repeat("x", fence.MaxKeyLen):   true,
		"":                                     false,
		strings.Repeat("x", fence.MaxKeyLen+1): false,
		"a\x00b":                               false,
		"\xff":                                 false,
	} {
		checkValid(t, "ValidateName", name, driver.ValidateName(name), ok)
	}
}

func TestValidateClaim(t *testing.T) {
	good := driver.Claim{Name: "job", Owner: "o", Kind: driver.Exclusive}
	for what, tc := range map[string]struct {
		c  driver.Claim
		ok bool
	}{
		"a lock":          {good, true},
		"a semaphore":     {driver.Claim{Name: "job", Owner: "o", Kind: driver.Semaphore}, true},
		"a read permit":   {driver.Claim{Name: "job", Owner: "o", Kind: driver.Read}, true},
		"a write permit":  {driver.Claim{Name: "job", Owner: "o", Kind: driver.Write}, true},
		"empty name":      {driver.Claim{Owner: "o", Kind: driver.Exclusive}, false},
		"empty owner":     {driver.Claim{Name: "job", Kind: driver.Exclusive}, false},
		"owner with NUL":  {driver.Claim{Name: "job", Owner: "o\x00", Kind: driver.Exclusive}, false},
		"owner too long":  {driver.Claim{Name: "job", Owner: strings.Repeat("o", fence.MaxKeyLen+1), Kind: driver.Exclusive}, false},
		"no kind":         {driver.Claim{Name: "job", Owner: "o"}, false},
		"an unknown kind": {driver.Claim{Name: "job", Owner: "o", Kind: driver.Write + 1}, false},
	} {
		checkValid(t, "ValidateClaim", what, driver.ValidateClaim(tc.c), tc.ok)
	}
}

func TestValidateTTL(t *testing.T) {
	for ttl, ok := range map[time.Duration]bool{
		driver.MinTTL: true, time.Minute: true,
		driver.MinTTL - 1: false, 0: false, -time.Second: false,
	} {
		checkValid(t, "ValidateTTL", ttl.String(), driver.ValidateTTL(ttl), ok)
	}
}

func TestValidateLimit(t *testing.T) {
	for n, ok := range map[int]bool{1: true, 2: true, driver.MaxPermits: true, 0: false, -1: false, driver.MaxPermits + 1: false} {
		checkValid(t, "ValidateLimit", strconv.Itoa(n), driver.ValidateLimit(n), ok)
	}
}

func TestValidateMetadata(t *testing.T) {
	for md, ok := range map[string]bool{
		"":                                 true,
		"host=a pid=1":                     true,
		"line\nbreak \"quote\" 'single' 🔒": true,
		strings.Repeat("x", driver.MaxMetadataLen):   true,
		strings.Repeat("x", driver.MaxMetadataLen+1): false,
		"nul\x00":      false,
		"\xff":         false,
		"\xed\xa0\x80": false, // a UTF-16 surrogate
	} {
		checkValid(t, "ValidateMetadata", md, driver.ValidateMetadata(md), ok)
	}
}

func TestValidate(t *testing.T) {
	lock := driver.Request{Name: "job", Owner: "o", TTL: time.Second, Kind: driver.Exclusive}
	with := func(f func(*driver.Request)) driver.Request {
		r := lock
		r.Names = nil
		f(&r)
		return r
	}
	set := func(names ...string) driver.Request {
		return with(func(r *driver.Request) { r.Name, r.Names = "", names })
	}
	many := make([]string, driver.MaxNames+1)
	for i := range many {
		many[i] = "n" + strings.Repeat("x", i)
	}
	for what, tc := range map[string]struct {
		req driver.Request
		ok  bool
	}{
		// The arguments of every request (ValidateArgs).
		"a lock":              {lock, true},
		"empty name":          {with(func(r *driver.Request) { r.Name = "" }), false},
		"name with NUL":       {with(func(r *driver.Request) { r.Name = "a\x00b" }), false},
		"empty owner":         {with(func(r *driver.Request) { r.Owner = "" }), false},
		"ttl at the minimum":  {with(func(r *driver.Request) { r.TTL = driver.MinTTL }), true},
		"ttl below":           {with(func(r *driver.Request) { r.TTL = driver.MinTTL - 1 }), false},
		"ttl of zero":         {with(func(r *driver.Request) { r.TTL = 0 }), false},
		"no kind":             {with(func(r *driver.Request) { r.Kind = 0 }), false},
		"an unknown kind":     {with(func(r *driver.Request) { r.Kind = driver.Write + 1 }), false},
		"a lock with a limit": {with(func(r *driver.Request) { r.Limit = 2 }), false},
		// Places in line (ValidatePlace).
		"a place":               {with(func(r *driver.Request) { r.Place = driver.MinPlaceTTL }), true},
		"a place below minimum": {with(func(r *driver.Request) { r.Place = driver.MinPlaceTTL - 1 }), false},
		"a negative place":      {with(func(r *driver.Request) { r.Place = -time.Second }), false},
		// Permits (ValidatePermit).
		"a semaphore":                 {with(func(r *driver.Request) { r.Kind, r.Limit = driver.Semaphore, 3 }), true},
		"a semaphore in line":         {with(func(r *driver.Request) { r.Kind, r.Limit, r.Place = driver.Semaphore, 3, time.Second }), true},
		"a semaphore of MaxPermits":   {with(func(r *driver.Request) { r.Kind, r.Limit = driver.Semaphore, driver.MaxPermits }), true},
		"a semaphore of 0":            {with(func(r *driver.Request) { r.Kind, r.Limit = driver.Semaphore, 0 }), false},
		"a semaphore of too many":     {with(func(r *driver.Request) { r.Kind, r.Limit = driver.Semaphore, driver.MaxPermits+1 }), false},
		"a read permit":               {with(func(r *driver.Request) { r.Kind = driver.Read }), true},
		"a write permit":              {with(func(r *driver.Request) { r.Kind = driver.Write }), true},
		"a read permit with a limit":  {with(func(r *driver.Request) { r.Kind, r.Limit = driver.Read, 1 }), false},
		"a write permit with a limit": {with(func(r *driver.Request) { r.Kind, r.Limit = driver.Write, 2 }), false},
		// Sets (ValidateMulti).
		"a set":                   {set("b", "a"), true},
		"a set of MaxNames":       {set(many[:driver.MaxNames]...), true},
		"an empty set":            {set(), false},
		"a set above MaxNames":    {set(many...), false},
		"a name twice":            {set("a", "b", "a"), false},
		"a bad name in a set":     {set("a", ""), false},
		"a set and a name":        {with(func(r *driver.Request) { r.Names = []string{"a"} }), false},
		"a set of permits":        {with(func(r *driver.Request) { r.Name, r.Names, r.Kind = "", []string{"a"}, driver.Read }), false},
		"a set in line":           {with(func(r *driver.Request) { r.Name, r.Names, r.Place = "", []string{"a"}, time.Second }), false},
		"a set resumed":           {with(func(r *driver.Request) { r.Name, r.Names, r.Resume = "", []string{"a"}, true }), false},
		"a set with a bad ttl":    {with(func(r *driver.Request) { r.Name, r.Names, r.TTL = "", []string{"a"}, 0 }), false},
		"a set with no owner":     {with(func(r *driver.Request) { r.Name, r.Names, r.Owner = "", []string{"a"}, "" }), false},
		"a set with metadata":     {with(func(r *driver.Request) { r.Name, r.Names, r.Metadata = "", []string{"a"}, "m" }), true},
		"a set with bad metadata": {with(func(r *driver.Request) { r.Name, r.Names, r.Metadata = "", []string{"a"}, "\x00" }), false},
		// Resume.
		"a resume":             {with(func(r *driver.Request) { r.Resume = true }), true},
		"a resume in line":     {with(func(r *driver.Request) { r.Resume, r.Place = true, time.Second }), false},
		"a resume of a permit": {with(func(r *driver.Request) { r.Resume, r.Kind = true, driver.Read }), false},
		// Metadata (ValidateMetadata, ValidateAcquire).
		"metadata":           {with(func(r *driver.Request) { r.Metadata = "host=a pid=1" }), true},
		"metadata with NUL":  {with(func(r *driver.Request) { r.Metadata = "\x00" }), false},
		"metadata too long":  {with(func(r *driver.Request) { r.Metadata = strings.Repeat("x", driver.MaxMetadataLen+1) }), false},
		"metadata not UTF-8": {with(func(r *driver.Request) { r.Metadata = "\xc3\x28" }), false},
	} {
		checkValid(t, "Validate", what, driver.Validate(tc.req), tc.ok)
	}
}

// checkValid fails the test unless err says ok: nil, or an error matching
// fence.ErrInvalid that reads as the lock's ("lock: invalid argument: ..."),
// never with fence's "fence:" prefix.
func checkValid(t *testing.T, fn, what string, err error, ok bool) {
	t.Helper()
	switch {
	case ok && err != nil:
		t.Errorf("%s(%.30q) = %v; want it valid", fn, what, err)
	case !ok && !errors.Is(err, fence.ErrInvalid):
		t.Errorf("%s(%.30q) = %v; want an error matching ErrInvalid", fn, what, err)
	case !ok && (!strings.HasPrefix(err.Error(), "lock: invalid argument: ") || strings.Contains(err.Error(), "fence:")):
		t.Errorf("%s(%.30q) = %q; want it to read \"lock: invalid argument: ...\", without \"fence:\"", fn, what, err)
	}
}

// Invalid's errors match ErrInvalid (fence's and so lock's) and read as the
// lock's: "lock: invalid argument: ", then the detail.
func TestInvalid(t *testing.T) {
	err := driver.Invalid("semaphore %q of %d permits", "jobs", 0)
	if !errors.Is(err, driver.ErrInvalid) || !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Invalid(...) = %v; want it to match ErrInvalid and fence.ErrInvalid", err)
	}
	if got, want := err.Error(), `lock: invalid argument: semaphore "jobs" of 0 permits`; got != want {
		t.Fatalf("Invalid(...) reads %q; want %q", got, want)
	}
}

// ValidateName applies fence.ValidateKey's rule, in its own words: it
// refuses exactly what ValidateKey refuses.
func TestValidateNameIsValidateKey(t *testing.T) {
	for _, name := range []string{"job", "", "a\x00b", "\xff", "\xed\xa0\x80", strings.Repeat("x", fence.MaxKeyLen), strings.Repeat("x", fence.MaxKeyLen+1)} {
		if got, want := driver.ValidateName(name) == nil, fence.ValidateKey(name) == nil; got != want {
			t.Errorf("ValidateName(%.30q) valid = %v, ValidateKey valid = %v", name, got, want)
		}
	}
}
