import Testing
@testable import HTTPWire

@Suite struct HTTPHeadersTests {
    @Test func lookupIsCaseInsensitiveAndKeepsOrder() {
        var headers = DKHTTPHeaders()
        headers.add(name: "Content-Type", value: "text/plain")
        headers.add(name: "set-cookie", value: "a=1")
        headers.add(name: "Set-Cookie", value: "b=2")
        #expect(headers.first(name: "content-type") == "text/plain")
        #expect(headers["SET-COOKIE"] == ["a=1", "b=2"])
        #expect(headers.contains(name: "CONTENT-TYPE"))
        #expect(!headers.contains(name: "Content-Length"))
    }

    @Test func replaceOrAddCollapsesRepeatedFields() {
        var headers: DKHTTPHeaders = ["A": "1", "B": "2", "a": "3"]
        headers.replaceOrAdd(name: "a", value: "9")
        #expect(headers.map(\.name) == ["A", "B"])
        #expect(headers["a"] == ["9"])
    }

    @Test func listValuesSplitsOnCommas() {
        let headers: DKHTTPHeaders = ["Transfer-Encoding": "gzip , chunked", "transfer-encoding": " ,x"]
        #expect(headers.listValues(name: "transfer-encoding") == ["gzip", "chunked", "x"])
    }
}
