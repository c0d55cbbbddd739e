import HTTPWire

/// A request the download machine decides to send: a `GET` of `url` with these fields (the conditions, the
/// `Range` and `If-Range` of ``RangeRequest``, the caller's fields less credentials a redirect dropped). The
/// executor sends it with its HTTP client as it is.
package struct MachineRequest: Sendable, Hashable {
    package var url: HTTPURL
    package var headers: DKHTTPHeaders

    package init(url: HTTPURL, headers: DKHTTPHeaders) {
        self.url = url
        self.headers = headers
    }
}
