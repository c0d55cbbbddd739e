import HTTPTypes
import HTTPWire

// swift-http-types at the public boundary: DownloadKit keeps its own header list
// (`DKHTTPHeaders` in HTTPWire, standard library only, fuzzed with the parser) because the parser, the
// resume info and the fuzz targets must not depend on a package; programs that already speak
// swift-http-types convert in one call each way, in field order, repeated fields kept.

extension DKHTTPHeaders {
    /// The fields of a swift-http-types `HTTPFields`, in order, each name as it was spelled.
    public init(_ fields: HTTPFields) {
        self.init(fields.map { ($0.name.rawName, $0.value) })
    }
}

extension HTTPFields {
    /// DownloadKit headers as swift-http-types fields, in order, repeated fields kept.
    ///
    /// Returns nil when a name is not an RFC 9110 field name (a token), rather than dropping the field:
    /// such a header could not be sent either (the request encoder refuses it).
    public init?(_ headers: DKHTTPHeaders) {
        self.init()
        for field in headers {
            guard let name = HTTPField.Name(field.name) else { return nil }
            append(HTTPField(name: name, value: field.value))
        }
    }
}
