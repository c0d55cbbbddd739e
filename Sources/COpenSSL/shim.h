#ifndef DOWNLOADKIT_COPENSSL_SHIM_H
#define DOWNLOADKIT_COPENSSL_SHIM_H

#include <openssl/opensslv.h>
#if OPENSSL_VERSION_NUMBER < 0x30000000L
#error "DownloadKit requires OpenSSL 3.0 or newer (apt install libssl-dev)"
#endif

#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>

#endif
