package aio_test

import (
	"crypto/tls"
	"crypto/x509"
)

func x509MarshalKey(c tls.Certificate) ([]byte, error) {
	return x509.MarshalPKCS8PrivateKey(c.PrivateKey)
}
