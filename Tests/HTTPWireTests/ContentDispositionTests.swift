import Testing

@testable import HTTPWire

@Suite struct ContentDispositionTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var input: String
        var type: String
        var filename: String?
        var filenameStar: String?
        var preferred: String?
        var testDescription: String { input }
    }

    static let valid: [Case] = [
        // RFC 6266 §5 examples.
        Case(input: "Attachment; filename=example.html", type: "attachment", filename: "example.html",
            filenameStar: nil, preferred: "example.html"),
        Case(input: "INLINE; FILENAME= \"an example.html\"", type: "inline", filename: "an example.html",
            filenameStar: nil, preferred: "an example.html"),
        Case(input: "attachment; filename*= UTF-8''%e2%82%ac%20rates", type: "attachment", filename: nil,
            filenameStar: "\u{20AC} rates", preferred: "\u{20AC} rates"),
        Case(input: "attachment; filename=\"EURO rates\"; filename*=utf-8''%e2%82%ac%20rates", type: "attachment",
            filename: "EURO rates", filenameStar: "\u{20AC} rates", preferred: "\u{20AC} rates"),
        // RFC 8187 §3.2.2, ISO-8859-1 with a language.
        Case(input: "attachment; filename*=iso-8859-1'en'%A3%20rates", type: "attachment", filename: nil,
            filenameStar: "\u{A3} rates", preferred: "\u{A3} rates"),
        // Quoted-pairs resolve; a lone backslash escapes the next byte (RFC 9110 §5.6.4).
        Case(input: #"attachment; filename="a \"quoted\" name\\x.txt""#, type: "attachment",
            filename: #"a "quoted" name\x.txt"#, filenameStar: nil, preferred: #"a "quoted" name\x.txt"#),
        Case(input: #"attachment; filename="C:\dir\f.txt""#, type: "attachment", filename: "C:dirf.txt",
            filenameStar: nil, preferred: "C:dirf.txt"),
        // Hostile names come out exactly as sent; sanitising is the engine's job.
        Case(input: "attachment; filename=\"../../etc/passwd\"", type: "attachment", filename: "../../etc/passwd",
            filenameStar: nil, preferred: "../../etc/passwd"),
        Case(input: "attachment; filename*=UTF-8''..%2F..%2Fetc%2Fpasswd", type: "attachment", filename: nil,
            filenameStar: "../../etc/passwd", preferred: "../../etc/passwd"),
        Case(input: "attachment; filename*=UTF-8''a%00b", type: "attachment", filename: nil,
            filenameStar: "a\0b", preferred: "a\0b"),
        // Tolerated sloppiness.
        Case(input: "filename=\"x.bin\"", type: "", filename: "x.bin", filenameStar: nil, preferred: "x.bin"),
        Case(input: "attachment; filename=my file.txt ", type: "attachment", filename: "my file.txt",
            filenameStar: nil, preferred: "my file.txt"),
        Case(input: "attachment;; foo; filename = a.zip;", type: "attachment", filename: "a.zip", filenameStar: nil,
            preferred: "a.zip"),
        Case(input: "attachment; filename=caf\u{E9}.txt", type: "attachment", filename: "caf\u{E9}.txt",
            filenameStar: nil, preferred: "caf\u{E9}.txt"),
        Case(input: "inline", type: "inline", filename: nil, filenameStar: nil, preferred: nil),
        // Undecodable filename* is ignored in favour of filename.
        Case(input: "attachment; filename*=UTF-8''%ff; filename=f.bin", type: "attachment", filename: "f.bin",
            filenameStar: nil, preferred: "f.bin"),
        Case(input: "attachment; filename*=koi8-r''%c1; filename=f.bin", type: "attachment", filename: "f.bin",
            filenameStar: nil, preferred: "f.bin"),
        Case(input: "attachment; filename*=UTF-8''%zz", type: "attachment", filename: nil, filenameStar: nil,
            preferred: nil),
        Case(input: "attachment; filename*=no-quotes", type: "attachment", filename: nil, filenameStar: nil,
            preferred: nil),
    ]

    @Test(arguments: valid)
    func decodesFaithfully(_ expected: Case) throws {
        let value = try ContentDisposition(parsing: expected.input)
        #expect(value.type == expected.type)
        #expect(value.filename == expected.filename)
        #expect(value.filenameStar == expected.filenameStar)
        #expect(value.preferredFilename == expected.preferred)
        #expect(try ContentDisposition(parsing: value.headerValue) == value)
    }

    @Test(arguments: [
        "attachment; filename=\"unterminated", "attachment; filename=\"a\r\nb\"", "attachment; filename=a\u{0}b",
        "attachment; =x", "attachment; filename=\"a\"b", "attachment; filename=\"a\\", "attachment; \"x\"",
        "attachment; filename=a\u{7F}",
    ])
    func rejectsMalformedValues(_ input: String) {
        #expect {
            try ContentDisposition(parsing: input)
        } throws: { error in
            (error as? WireError)?.code == .malformedContentDisposition
        }
    }

    @Test func parametersAreCaseInsensitiveAndSerialisedSafely() throws {
        let value = try ContentDisposition(parsing: "ATTACHMENT; FileName=\"a \\\"b\\\".txt\"; Size=10")
        #expect(value.isAttachment)
        #expect(value.parameter(named: "SIZE") == "10")
        #expect(value.parameters.map(\.name) == ["filename", "size"])
        #expect(value.headerValue == #"attachment; filename="a \"b\".txt"; size=10"#)
    }

    @Test(arguments: [
        ("UTF-8''%e2%82%ac%20rates", "\u{20AC} rates"),
        ("utf-8'de'Gr%C3%BC%C3%9Fe", "Gr\u{FC}\u{DF}e"),
        ("ISO-8859-1''%E9t%E9", "\u{E9}t\u{E9}"),
        ("UTF-8''", ""),
    ])
    func decodesExtendedValues(_ input: String, _ expected: String) {
        #expect(ContentDisposition.decodeExtendedValue(input) == expected)
    }
}
