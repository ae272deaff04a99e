def lines(p):
    return [l.strip() for l in open(p) if l.strip()]

def test_title():
    assert lines('/app/recipe_6.txt')[0] == 'Pancakes (serves 6)'

def test_ingredients():
    src = lines('/app/recipe.txt')[1:]
    out = lines('/app/recipe_6.txt')[1:]
    assert len(out) == len(src)
    for s, o in zip(src, out):
        sq, srest = s.split(' ', 1)
        oq, orest = o.split(' ', 1)
        assert ' '.join(orest.split()) == srest, o
        assert abs(float(oq) - float(sq) * 1.5) < 1e-9, o
