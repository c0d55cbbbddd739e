import HTTPWire

/// One HTTP request: a method, an absolute URL and extra header fields.
public struct DKHTTPRequest: Sendable, Hashable {
    /// `GET` or `HEAD`.
    public var method: DKHTTPMethod
    /// The absolute `http` or `https` URL. Userinfo becomes Basic authorization unless `headers`
    /// carries its own `Authorization`; it never appears in the request line.
    public var url: HTTPURL
    /// Extra fields, sent after `Host` in the given order. A `Host` field here is ignored.
    public var headers: DKHTTPHeaders

    /// Creates a request.
    public init(method: DKHTTPMethod = .GET, url: HTTPURL, headers: DKHTTPHeaders = DKHTTPHeaders()) {
        self.method = method
        self.url = url
        self.headers = headers
    }
}
