import HTTPWire

/// The one way a range request's fields are written, by the download's requests (resume, probe) and by
/// every segment worker: `Range` asks for the bytes, and `If-Range` carries the validator that proves the
/// bytes already held belong to the same version — a changed resource then answers 200 (the whole new
/// body) instead of a 206 that would splice two versions (RFC 9110 §13.1.5). The validator is a strong
/// ETag or a Last-Modified date, never a weak ETag (the caller's `ifRange`). Without one, any `If-Range`
/// in the caller's fields goes: a condition about bytes this request does not rely on.
package enum RangeRequest {
    /// `headers` asking for `range`, conditional on `ifRange` when given.
    package static func headers(_ headers: DKHTTPHeaders, asking range: ByteRangeSpec, ifRange: String?) -> DKHTTPHeaders {
        var headers = headers
        headers.replaceOrAdd(name: "Range", value: RangeHeader(ranges: [range]).headerValue)
        if let ifRange {
            headers.replaceOrAdd(name: "If-Range", value: ifRange)
        } else {
            headers.remove(name: "If-Range")
        }
        return headers
    }
}
