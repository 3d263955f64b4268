package dynamodb

import (
	"errors"
	"fmt"
	"regexp"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// ErrNoTable means the table named in the options does not exist: run
// Migrate, or make it with CreateTableInput.
var ErrNoTable = errors.New("fencekit/dynamodb: table does not exist")

// tableName is DynamoDB's rule for table names.
var tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

func validateTable(table string) error {
	if !tableName.MatchString(table) {
		return fence.Invalid("table name %q: want 3 to 255 of a-z, A-Z, 0-9, '_', '-', '.'", table)
	}
	return nil
}

// conditionFailed reports whether err is a write's condition that did not
// hold, and the item the server returned with it, if any (DynamoDB does
// with ReturnValuesOnConditionCheckFailure; dynalite does not).
func conditionFailed(err error) (map[string]types.AttributeValue, bool) {
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return cf.Item, true
	}
	return nil, false
}

// transientCodes are the error codes of failures that the same call may
// cure when sent again.
var transientCodes = map[string]bool{
	"ProvisionedThroughputExceededException": true,
	"ThrottlingException":                    true,
	"RequestLimitExceeded":                   true,
	"InternalServerError":                    true,
	"ServiceUnavailable":                     true,
	"TransactionConflictException":           true,
	"TransactionInProgressException":         true,
}

// classify turns an SDK error from op into one of this package's: the
// context's own error as is, throttling, 5xx and connection failures as
// retryable (driver.Transient), a missing table as ErrNoTable, a request
// the server refused as invalid as fence.ErrInvalid.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var rnf *types.ResourceNotFoundException
	if errors.As(err, &rnf) {
		return fmt.Errorf("fencekit/dynamodb: %s: %w: %w", op, ErrNoTable, err)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if transientCodes[ae.ErrorCode()] {
			return driver.Transient(fmt.Errorf("fencekit/dynamodb: %s: %w", op, err))
		}
		if ae.ErrorCode() == "ValidationException" {
			return fmt.Errorf("fencekit/dynamodb: %s: %w: %w", op, fence.ErrInvalid, err)
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
		return driver.Transient(fmt.Errorf("fencekit/dynamodb: %s: %w", op, err))
	}
	return fmt.Errorf("fencekit/dynamodb: %s: %w", op, err)
}
