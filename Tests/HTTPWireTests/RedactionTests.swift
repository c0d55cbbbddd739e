import Testing

@testable import HTTPWire

/// The one redaction rule (issue #44, items 8–9): what a log line, an error text or a listing may show of
/// a URL, and the caller's header fields refused with a text that cannot carry a line break.
@Suite struct RedactionTests {
    static let signed = "http://u:PASS@example.com:8080/a/b.iso?sig=SECRET&expires=99&flag#frag-TOKEN"

    @Test func descriptionMasksThePasswordEveryQueryValueAndTheFragment() throws {
        let url = try HTTPURL(Self.signed)
        #expect(url.description == "http://u:***@example.com:8080/a/b.iso?sig=***&expires=***&***#***")
        #expect("\(url)" == url.description, "string interpolation is the redacted form")
        // Empty values and empty fields carry nothing and stay as they were.
        #expect(try HTTPURL("http://h/p?a=&&b=1").description == "http://h/p?a=&&b=***")
        // Nothing to hide: unchanged.
        #expect(try HTTPURL("https://h/p").description == "https://h/p")
    }

    @Test func listingDescriptionMasksOnlyThePassword() throws {
        let url = try HTTPURL(Self.signed)
        #expect(url.listingDescription == "http://u:***@example.com:8080/a/b.iso?sig=SECRET&expires=99&flag#frag-TOKEN")
        #expect(HTTPURL.redacting(Self.signed, .password) == url.listingDescription)
        // The wire form is untouched.
        #expect(url.absoluteString == Self.signed)
    }

    @Test(arguments: [
        // An invalid port, a port too large, an unsupported scheme, a space, a CR: none parses, none leaks.
        ("http://u:PASS@127.0.0.1:99999/x?sig=SECRET", "http://u:***@127.0.0.1:99999/x?sig=***"),
        ("http://u:PASS@127.0.0.1:port/x?sig=SECRET#SECRET", "http://u:***@127.0.0.1:port/x?sig=***#***"),
        ("ftp://u:PASS@host/x?sig=SECRET", "ftp://u:***@host/x?sig=***"),
        ("http://u:PA SS@host/x y?sig=SEC RET", "http://u:***@host/x y?sig=***"),
        ("http://u:PASS@host/x\r\n?sig=SECRET", "http://u:***@host/x\r\n?sig=***"),
    ])
    func redactingATextThatIsNotAValidURLStillHidesItsSecrets(_ input: String, _ expected: String) {
        #expect((try? HTTPURL(input)) == nil)
        let redacted = HTTPURL.redacting(input)
        #expect(redacted == expected)
        #expect(!redacted.contains("PASS") && !redacted.contains("SECRET"))
    }

    @Test func redactingAValidURLIsItsDescription() throws {
        #expect(HTTPURL.redacting(Self.signed) == (try HTTPURL(Self.signed)).description)
        // An unencoded "@" in the password: the last "@" ends the userinfo, all of the password is hidden.
        #expect(HTTPURL.redacting("http://u:P@SS@host/?SECRET") == "http://u:***@host/?***")
    }

    @Test func callerHeaderFieldsAreCheckedBeforeAnyRequestIsBuilt() throws {
        #expect(throws: Never.self) { try RequestHead.validateFields(DKHTTPHeaders([("X-A", "fine\tvalue")])) }
        do {
            try RequestHead.validateFields(DKHTTPHeaders([("Authorization", "Bearer TOKEN\r\nX-Evil: 1")]))
            Issue.record("a CR in a header value was accepted")
        } catch {
            #expect(error.code == .invalidHeaderValue)
            #expect(error.isCallerInput)
            #expect(error.detail.contains("Authorization"), "names the header")
            #expect(!error.detail.contains("TOKEN"), "never the value")
        }
    }

    @Test func aControlByteInAHeaderNameIsShownEscapedSoTheErrorLineCannotBeSplit() {
        let head = RequestHead(method: .GET, target: "/", host: "h", headers: DKHTTPHeaders([("X-A\r\nX-Forged", "1")]))
        do {
            _ = try head.encoded()
            Issue.record("a CRLF in a header name was accepted")
        } catch {
            #expect(error.code == .invalidHeaderName)
            #expect(error.isCallerInput)
            #expect(!error.detail.contains("\r") && !error.detail.contains("\n"), "\(error.detail)")
            #expect(error.detail.contains("X-A\\x0D\\x0AX-Forged"), "\(error.detail)")
        }
    }

    @Test func serverSideWireErrorsAreNotCallerInput() {
        #expect(!WireError(.malformedURL, "x").isCallerInput)
        #expect(!WireError(.invalidPort, "x").isCallerInput)
    }
}
