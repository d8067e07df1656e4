//! A small XML writer for S3 responses, on quick-xml so that escaping is never hand-rolled.

use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};

/// The S3 namespace on result documents.
pub const S3_NS: &str = "http://s3.amazonaws.com/doc/2006-03-01/";

pub struct XmlWriter {
    w: Writer<Vec<u8>>,
}

impl Default for XmlWriter {
    fn default() -> Self {
        Self::new()
    }
}

// Writing into a Vec<u8> cannot fail, so the io results below are ignored on purpose.
impl XmlWriter {
    pub fn new() -> Self {
        let mut w = Writer::new(Vec::with_capacity(512));
        let _ = w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)));
        XmlWriter { w }
    }

    /// Opens the root element of a result document, with the S3 namespace.
    pub fn open_root(&mut self, name: &str) {
        let start = BytesStart::new(name).with_attributes([("xmlns", S3_NS)]);
        let _ = self.w.write_event(Event::Start(start));
    }

    pub fn open(&mut self, name: &str) {
        let _ = self.w.write_event(Event::Start(BytesStart::new(name)));
    }

    /// `<Grantee xmlns:xsi=... xsi:type="CanonicalUser">`, as S3 writes it in ACLs.
    pub fn open_grantee(&mut self) {
        let start = BytesStart::new("Grantee").with_attributes([
            ("xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance"),
            ("xsi:type", "CanonicalUser"),
        ]);
        let _ = self.w.write_event(Event::Start(start));
    }

    /// `<Grantee xmlns:xsi=... xsi:type="Group">`, S3's grantee of a group (AllUsers).
    pub fn open_group_grantee(&mut self) {
        let start = BytesStart::new("Grantee").with_attributes([
            ("xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance"),
            ("xsi:type", "Group"),
        ]);
        let _ = self.w.write_event(Event::Start(start));
    }

    pub fn close(&mut self, name: &str) {
        let _ = self.w.write_event(Event::End(BytesEnd::new(name)));
    }

    /// `<name>text</name>`, with the text escaped.
    pub fn leaf(&mut self, name: &str, text: &str) {
        self.open(name);
        let _ = self.w.write_event(Event::Text(BytesText::new(text)));
        self.close(name);
    }

    pub fn finish(self) -> Vec<u8> {
        self.w.into_inner()
    }
}

impl XmlWriter {
    /// Escaped text inside the currently open element.
    pub fn leaf_text(&mut self, text: &str) {
        let _ = self.w.write_event(Event::Text(BytesText::new(text)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        let mut w = XmlWriter::new();
        w.open_root("R");
        w.leaf("Key", "a<b>&\"c\"");
        w.close("R");
        let s = String::from_utf8(w.finish()).unwrap();
        assert!(s.contains("<Key>a&lt;b&gt;&amp;&quot;c&quot;</Key>"), "{s}");
        assert!(s.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?><R xmlns="));
    }
}
