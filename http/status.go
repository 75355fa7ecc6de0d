package http

// Status codes used by this package and its users (RFC 9110 §15).
const (
	StatusContinue           = 100
	StatusSwitchingProtocols = 101

	StatusOK             = 200
	StatusCreated        = 201
	StatusAccepted       = 202
	StatusNoContent      = 204
	StatusPartialContent = 206

	StatusMovedPermanently  = 301
	StatusFound             = 302
	StatusSeeOther          = 303
	StatusNotModified       = 304
	StatusTemporaryRedirect = 307
	StatusPermanentRedirect = 308

	StatusBadRequest                  = 400
	StatusUnauthorized                = 401
	StatusForbidden                   = 403
	StatusNotFound                    = 404
	StatusMethodNotAllowed            = 405
	StatusRequestTimeout              = 408
	StatusLengthRequired              = 411
	StatusPreconditionFailed          = 412
	StatusContentTooLarge             = 413
	StatusURITooLong                  = 414
	StatusRangeNotSatisfiable         = 416
	StatusExpectationFailed           = 417
	StatusTooManyRequests             = 429
	StatusRequestHeaderFieldsTooLarge = 431

	StatusInternalServerError     = 500
	StatusNotImplemented          = 501
	StatusServiceUnavailable      = 503
	StatusHTTPVersionNotSupported = 505
)

// More status codes of RFC 9110 §15 and RFC 6585, for applications'
// responses: every code here has its reason phrase in StatusText.
const (
	StatusEarlyHints                    = 103
	StatusNonAuthoritativeInfo          = 203
	StatusResetContent                  = 205
	StatusMultipleChoices               = 300
	StatusPaymentRequired               = 402
	StatusNotAcceptable                 = 406
	StatusProxyAuthRequired             = 407
	StatusConflict                      = 409
	StatusGone                          = 410
	StatusUnsupportedMediaType          = 415
	StatusMisdirectedRequest            = 421
	StatusUnprocessableContent          = 422
	StatusTooEarly                      = 425
	StatusUpgradeRequired               = 426
	StatusPreconditionRequired          = 428
	StatusUnavailableForLegalReasons    = 451
	StatusBadGateway                    = 502
	StatusGatewayTimeout                = 504
	StatusInsufficientStorage           = 507
	StatusNetworkAuthenticationRequired = 511
)

var statusText = map[int]string{
	StatusContinue:           "Continue",
	StatusSwitchingProtocols: "Switching Protocols",

	StatusOK:             "OK",
	StatusCreated:        "Created",
	StatusAccepted:       "Accepted",
	StatusNoContent:      "No Content",
	StatusPartialContent: "Partial Content",

	StatusMovedPermanently:  "Moved Permanently",
	StatusFound:             "Found",
	StatusSeeOther:          "See Other",
	StatusNotModified:       "Not Modified",
	StatusTemporaryRedirect: "Temporary Redirect",
	StatusPermanentRedirect: "Permanent Redirect",

	StatusBadRequest:                  "Bad Request",
	StatusUnauthorized:                "Unauthorized",
	StatusForbidden:                   "Forbidden",
	StatusNotFound:                    "Not Found",
	StatusMethodNotAllowed:            "Method Not Allowed",
	StatusRequestTimeout:              "Request Timeout",
	StatusLengthRequired:              "Length Required",
	StatusPreconditionFailed:          "Precondition Failed",
	StatusContentTooLarge:             "Content Too Large",
	StatusURITooLong:                  "URI Too Long",
	StatusRangeNotSatisfiable:         "Range Not Satisfiable",
	StatusExpectationFailed:           "Expectation Failed",
	StatusTooManyRequests:             "Too Many Requests",
	StatusRequestHeaderFieldsTooLarge: "Request Header Fields Too Large",

	StatusInternalServerError:     "Internal Server Error",
	StatusNotImplemented:          "Not Implemented",
	StatusServiceUnavailable:      "Service Unavailable",
	StatusHTTPVersionNotSupported: "HTTP Version Not Supported",

	StatusEarlyHints:                    "Early Hints",
	StatusNonAuthoritativeInfo:          "Non-Authoritative Information",
	StatusResetContent:                  "Reset Content",
	StatusMultipleChoices:               "Multiple Choices",
	StatusPaymentRequired:               "Payment Required",
	StatusNotAcceptable:                 "Not Acceptable",
	StatusProxyAuthRequired:             "Proxy Authentication Required",
	StatusConflict:                      "Conflict",
	StatusGone:                          "Gone",
	StatusUnsupportedMediaType:          "Unsupported Media Type",
	StatusMisdirectedRequest:            "Misdirected Request",
	StatusUnprocessableContent:          "Unprocessable Content",
	StatusTooEarly:                      "Too Early",
	StatusUpgradeRequired:               "Upgrade Required",
	StatusPreconditionRequired:          "Precondition Required",
	StatusUnavailableForLegalReasons:    "Unavailable For Legal Reasons",
	StatusBadGateway:                    "Bad Gateway",
	StatusGatewayTimeout:                "Gateway Timeout",
	StatusInsufficientStorage:           "Insufficient Storage",
	StatusNetworkAuthenticationRequired: "Network Authentication Required",
}

// StatusText returns the reason phrase for a status code, or "" for a code
// this package does not know (an empty reason phrase is valid HTTP).
func StatusText(code int) string { return statusText[code] }
