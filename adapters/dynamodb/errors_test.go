package dynamodb_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// failing is an API whose every call fails with err: the answers dynalite
// never gives (throttling, 5xx).
type failing struct{ err error }

func (f failing) GetItem(context.Context, *awsddb.GetItemInput, ...func(*awsddb.Options)) (*awsddb.GetItemOutput, error) {
	return nil, f.err
}
func (f failing) PutItem(context.Context, *awsddb.PutItemInput, ...func(*awsddb.Options)) (*awsddb.PutItemOutput, error) {
	return nil, f.err
}
func (f failing) UpdateItem(context.Context, *awsddb.UpdateItemInput, ...func(*awsddb.Options)) (*awsddb.UpdateItemOutput, error) {
	return nil, f.err
}
func (f failing) DeleteItem(context.Context, *awsddb.DeleteItemInput, ...func(*awsddb.Options)) (*awsddb.DeleteItemOutput, error) {
	return nil, f.err
}

func status(code int) error {
	return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}},
		Err:      errors.New("server said no"),
	}}
}

// How the server's refusals reach the caller, as docs/dynamodb.md says:
// throttling, InternalServerError, 5xx and transaction conflicts are
// retryable, a ValidationException matches fence.ErrInvalid, a missing
// table ErrNoTable, and anything else is neither.
func TestErrorsAreClassified(t *testing.T) {
	cases := []struct {
		name               string
		err                error
		retryable, invalid bool
		noTable            bool
	}{
		{"throughput exceeded", &types.ProvisionedThroughputExceededException{Message: new(string)}, true, false, false},
		{"throttling", &smithy.GenericAPIError{Code: "ThrottlingException"}, true, false, false},
		{"request limit", &types.RequestLimitExceeded{}, true, false, false},
		{"internal server error", &types.InternalServerError{}, true, false, false},
		{"HTTP 503", status(503), true, false, false},
		{"transaction conflict", &types.TransactionConflictException{}, true, false, false},
		{"validation", &smithy.GenericAPIError{Code: "ValidationException"}, false, true, false},
		{"no table", &types.ResourceNotFoundException{}, false, false, true},
		{"access denied", &smithy.GenericAPIError{Code: "AccessDeniedException"}, false, false, false},
		{"HTTP 400", status(400), false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api := failing{c.err}
			b, err := fenceddb.NewBackend(api, "fencekit_test", nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := fenceddb.NewStore(api, "fencekit_test", nil)
			if err != nil {
				t.Fatal(err)
			}
			_, berr := b.Acquire(context.Background(), driver.Request{Name: "n", Owner: "o", TTL: 1e9, Kind: driver.Exclusive})
			serr := s.Put(context.Background(), "k", 1, []byte("v"))
			for what, err := range map[string]error{"Backend.Acquire": berr, "Store.Put": serr} {
				if got := driver.Retryable(err); got != c.retryable {
					t.Errorf("%s: %v: retryable %v, want %v", what, err, got, c.retryable)
				}
				if got := errors.Is(err, fence.ErrInvalid); got != c.invalid {
					t.Errorf("%s: %v: ErrInvalid %v, want %v", what, err, got, c.invalid)
				}
				if got := errors.Is(err, fenceddb.ErrNoTable); got != c.noTable {
					t.Errorf("%s: %v: ErrNoTable %v, want %v", what, err, got, c.noTable)
				}
				if !errors.Is(err, c.err) {
					t.Errorf("%s: %v does not wrap the SDK's error", what, err)
				}
			}
		})
	}
}
