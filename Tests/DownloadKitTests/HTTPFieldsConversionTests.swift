import DownloadKit
import HTTPTypes
import HTTPWire
import Testing

@Suite("swift-http-types conversions")
struct HTTPFieldsConversionTests {
    @Test func fieldsRoundTripInOrderWithRepeatsAndSpelling() throws {
        var fields = HTTPFields()
        fields.append(HTTPField(name: .accept, value: "*/*"))
        fields.append(HTTPField(name: try #require(HTTPField.Name("X-Api-Key")), value: "k1"))
        fields.append(HTTPField(name: .cookie, value: "a=1"))
        fields.append(HTTPField(name: .cookie, value: "b=2"))
        let headers = DKHTTPHeaders(fields)
        #expect(headers.map(\.name) == ["Accept", "X-Api-Key", "Cookie", "Cookie"])
        #expect(headers.first(name: "x-api-key") == "k1")
        #expect(headers.listValues(name: "Cookie") == ["a=1", "b=2"])
        let back = try #require(HTTPFields(headers))
        #expect(back == fields)
    }

    @Test func aNameThatIsNotATokenIsRefusedNotDropped() {
        let headers: DKHTTPHeaders = ["Good": "1", "Bad Name": "2"]
        #expect(HTTPFields(headers) == nil)
    }
}
