import os
EXP = ['billing@northwind.com', 'j.doe+support@devshop.io', 'kim_lee@devshop.io', 'legal@northwind.com', 'media-relations@big-news.co.uk', 'sandra.ortiz@northwind.com']

def test_exists():
    assert os.path.isfile('/app/emails.txt')

def test_addresses():
    got = [l.strip() for l in open('/app/emails.txt') if l.strip()]
    assert sorted(set(got)) == EXP
    assert len(got) == len(EXP)

def test_sorted():
    got = [l.strip() for l in open('/app/emails.txt') if l.strip()]
    assert got == sorted(got)
