import Testing
@testable import HTTPClient

@Suite struct HTTPClientModuleTests {
    @Test func offersHTTP11ViaALPN() {
        #expect(HTTPClientModule.alpnProtocol == "http/1.1")
    }
}
