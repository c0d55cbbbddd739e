import Foundation
import HTTPWire
import Testing
import TestThreads

@testable import DownloadKitMetalink

@Suite struct XMLReaderTests {
    static func parse(_ text: String, limits: MetalinkLimits = .default) throws(MetalinkError) -> XMLElement {
        try XMLReader.parse(Array(text.utf8), limits: limits)
    }

    @Test func readsElementsAttributesTextAndReferences() throws {
        let root = try Self.parse(
            "\u{FEFF}<?xml version='1.0' encoding='UTF-8'?>\r\n<?style x?><!-- c --><a x='1' y=\"&quot;2&apos;\" z=\"a&#9;b\tc\">"
                + "<t>t&lt;&gt;&amp;&#65;&#x1F600;<![CDATA[<&>]]>\r\nu<!-- inner --><?pi?>\rv</t><b/><c></c >\n dropped </a ><!-- end -->\n"
        )
        #expect(root.localName == "a" && root.namespace == nil)
        #expect(root.attribute("x") == "1" && root.attribute("y") == "\"2'" && root.attribute("z") == "a\tb c")
        #expect(root.children.first?.text == "t<>&A\u{1F600}<&>\nu\nv")
        #expect(root.children.map(\.localName) == ["t", "b", "c"])
        #expect(root.text == "")  // an element with children keeps no text
        #expect(root.line == 2 && root.column == 22)
    }

    @Test func resolvesNamespacesByPrefix() throws {
        let root = try Self.parse(
            "<ml:metalink xmlns:ml=\"urn:ietf:params:xml:ns:metalink\" xmlns=\"urn:d\"><ml:file ml:a=\"1\" b=\"2\"/><x xmlns=\"\"/><y/></ml:metalink>"
        )
        #expect(root.namespace == Metalink.namespaceV4 && root.localName == "metalink")
        let file = root.children[0]
        #expect(file.namespace == Metalink.namespaceV4)
        #expect(
            file.attributes == [
                XMLAttribute(namespace: Metalink.namespaceV4, localName: "a", value: "1"),
                XMLAttribute(namespace: nil, localName: "b", value: "2"),
            ])
        #expect(root.children[1].namespace == nil && root.children[2].namespace == "urn:d")
        // A prefixed Metalink document parses like an unprefixed one.
        let metalink = try Metalink(
            parsing: """
                <m:metalink xmlns:m="urn:ietf:params:xml:ns:metalink"><m:file name="f"><m:size>3</m:size>\
                <m:url priority="2">http://a/f</m:url></m:file></m:metalink>
                """)
        #expect(
            metalink.files == [MetalinkFile(name: "f", size: 3, urls: [MetalinkURL(url: "http://a/f", priority: 2)])])
    }

    /// Malformed and hostile XML: each gives its named error with a line and column, never a trap.
    @Test(
        arguments: [
            ("", MetalinkError.Code.malformedXML, 1, 1),
            ("   ", .malformedXML, 1, 4),
            ("<a>", .malformedXML, 1, 1),
            ("<a><b></a>", .malformedXML, 1, 7),
            ("<a></b>", .malformedXML, 1, 4),
            ("</a>", .malformedXML, 1, 1),
            ("<a/><b/>", .malformedXML, 1, 5),
            ("<a/>text", .malformedXML, 1, 5),
            ("x<a/>", .malformedXML, 1, 1),
            ("<a x=1/>", .malformedXML, 1, 6),
            ("<a x='1' x='2'/>", .malformedXML, 1, 10),
            ("<a x='1'y='2'/>", .malformedXML, 1, 9),
            ("<a x='<'/>", .malformedXML, 1, 7),
            ("<a x='1/>", .malformedXML, 1, 6),
            ("<a>\n  &bogus;</a>", .undefinedEntity, 2, 3),
            ("<a>&nbsp;</a>", .undefinedEntity, 1, 4),
            ("<a><b/>&bogus;</a>", .undefinedEntity, 1, 8),
            ("<a>&amp</a>", .malformedXML, 1, 4),
            ("<a>& b</a>", .malformedXML, 1, 4),
            ("<a>&#0;</a>", .malformedXML, 1, 4),
            ("<a>&#xD800;</a>", .malformedXML, 1, 4),
            ("<a>&#x110000;</a>", .malformedXML, 1, 4),
            ("<a>&#99999999999;</a>", .malformedXML, 1, 4),
            ("<a>&#xZZ;</a>", .malformedXML, 1, 4),
            ("<a>\u{1}</a>", .malformedXML, 1, 4),
            ("<a><!-- open </a>", .malformedXML, 1, 4),
            ("<a><![CDATA[ open </a>", .malformedXML, 1, 4),
            ("<a><?pi open </a>", .malformedXML, 1, 4),
            ("<a><?xml version='1.0'?></a>", .malformedXML, 1, 4),
            ("<a><!ELEMENT a ANY></a>", .malformedXML, 1, 4),
            ("<1a/>", .malformedXML, 1, 2),
            ("<a:b:c/>", .malformedXML, 1, 2),
            ("<:a/>", .malformedXML, 1, 2),
            ("<p:a/>", .unboundNamespacePrefix, 1, 1),
            ("<a p:x='1'/>", .unboundNamespacePrefix, 1, 1),
            ("<a xmlns:p=''/>", .malformedXML, 1, 4),
            ("<a xmlns:p='u' xmlns:q='u' p:x='1' q:x='2'/>", .malformedXML, 1, 1),
            ("<?xml version='1.0' encoding='ISO-8859-1'?><a/>", .unsupportedEncoding, 1, 1),
            ("<?xml version='1.0' encoding='UTF-16'?><a/>", .unsupportedEncoding, 1, 1),
            // Billion laughs and XXE: refused at the DOCTYPE, before any entity is declared.
            (
                "<?xml version=\"1.0\"?>\n<!DOCTYPE lolz [<!ENTITY lol \"lol\"><!ENTITY lol2 \"&lol;&lol;&lol;&lol;\">]>\n<lolz>&lol2;</lolz>",
                .doctypeRefused, 2, 1
            ),
            ("<!DOCTYPE m [<!ENTITY xxe SYSTEM \"file:///etc/passwd\">]><m>&xxe;</m>", .doctypeRefused, 1, 1),
            ("<a><!DOCTYPE a></a>", .doctypeRefused, 1, 4),
        ] as [(String, MetalinkError.Code, Int, Int)])
    func refusesMalformedXML(_ text: String, _ code: MetalinkError.Code, _ line: Int, _ column: Int) {
        #expect {
            try Self.parse(text)
        } throws: { error in
            guard let error = error as? MetalinkError else { return false }
            return error.code == code && error.line == line && error.column == column
        }
    }

    @Test func refusesInvalidUTF8WithItsPosition() {
        for bytes: [UInt8] in [
            [0x3C, 0x61, 0x3E, 0xFF, 0x3C, 0x2F, 0x61, 0x3E], [0x3C, 0x61, 0x3E, 0xC3, 0x3C, 0x2F, 0x61, 0x3E],
        ] {
            #expect {
                try XMLReader.parse(bytes)
            } throws: { error in
                (error as? MetalinkError).map { $0.code == .malformedXML && $0.column == 4 } ?? false
            }
        }
    }

    /// Each limit refuses the input that goes one past it, and names itself.
    @Test(
        arguments: [
            (
                String(repeating: "<a>", count: 33) + String(repeating: "</a>", count: 33),
                MetalinkError.Code.depthLimitExceeded, "maxDepth"
            ),
            ("<a>" + String(repeating: "<b/>", count: 262_144) + "</a>", .elementLimitExceeded, "maxElements"),
            (
                "<a " + (0..<33).map { "x\($0)='1'" }.joined(separator: " ") + "/>", .attributeLimitExceeded,
                "maxAttributes"
            ),
            ("<a x='" + String(repeating: "y", count: 65_537) + "'/>", .valueLimitExceeded, "maxValueBytes"),
            ("<a>" + String(repeating: "&amp;", count: 65_537) + "</a>", .valueLimitExceeded, "maxValueBytes"),
            (
                "<a>" + String(repeating: "<![CDATA[yyyy]]>", count: 16_385) + "</a>", .valueLimitExceeded,
                "maxValueBytes"
            ),
        ] as [(String, MetalinkError.Code, String)])
    func limitsNameThemselves(_ text: String, _ code: MetalinkError.Code, _ limit: String) async {
        let outcome = await onOwnThread { () -> Result<String, MetalinkError> in
            Result { () throws(MetalinkError) in try Self.parse(text).localName }
        }
        guard case .failure(let error) = outcome else {
            Issue.record("parsed past the \(limit) limit")
            return
        }
        #expect(error.code == code && error.detail.contains(limit), "\(error)")
    }

    @Test func justInsideTheLimitsParses() async throws {
        let deep = String(repeating: "<a>", count: 32) + String(repeating: "</a>", count: 32)
        let attributes = "<a " + (0..<32).map { "x\($0)='1'" }.joined(separator: " ") + "/>"
        let value = "<a x='" + String(repeating: "y", count: 65_536) + "'/>"
        let parsed = await onOwnThread { () -> Result<(String, Int, Int), MetalinkError> in
            Result { () throws(MetalinkError) in
                (try Self.parse(deep).localName, try Self.parse(attributes).attributes.count, try Self.parse(value).attributes.count)
            }
        }
        let (name, attributeCount, valueAttributes) = try parsed.get()
        #expect(name == "a")
        #expect(attributeCount == 32)
        #expect(valueAttributes == 1)
    }

    @Test func sizeLimitIsCheckedBeforeReading() {
        let limits = MetalinkLimits(maxBytes: 10)
        #expect {
            try Self.parse("<a>0123456789</a>", limits: limits)
        } throws: { error in
            (error as? MetalinkError)?.code == .sizeLimitExceeded && "\(error)".contains("maxBytes")
        }
        #expect(MetalinkLimits.default.maxBytes == 32 << 20)
    }
}
